"""The sample application deployed by function_app.py: a shooting range and an order flow."""
