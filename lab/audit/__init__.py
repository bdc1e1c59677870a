"""The audit bench and the single-machine anchors it measures Spark against."""
