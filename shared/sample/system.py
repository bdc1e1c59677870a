"""The sample's order flow as a system of three services, one bus app each.

The handlers and messages are the sample app's (``shared.sample.app``); here they are split
the way ``infra/system.bicep`` deploys them (``infra/system.parameters.json``), each app its
own Function App with its own state and identity, the three sharing one messaging account:

* ``orders`` (``shared.sample.system:orders``): the saga ``orders`` (each order's checkout,
  ``add_checkout``) and the endpoint ``loyalty``; sends
  ChargePayment and RefundPayment to ``payments`` and ShipOrder to ``shipping``, and publishes
  OrderPlaced, which ``shipping`` subscribes to. It also serves the web's ``POST /api/orders``
  as the sample app does (the same declaration, ``add_storefront``): the order row and its
  PlaceOrder in one transactional session of the endpoint ``storefront``, in Table Storage or,
  with ``SAMPLE_STOREFRONT_STORE=postgres``, in PostgreSQL (``shared.sample.storefront``).
* ``payments`` (``shared.sample.system:payments``): the endpoint ``payments``, its state in
  PostgreSQL, charging through the service ``provider`` (so the bus adds its performer); tells
  ``orders`` of a declined payment and sends ShipOrder to ``shipping``.
* ``shipping`` (``shared.sample.system:shipping``): the endpoint ``shipping``; tells ``orders``
  that an order shipped, which completes its checkout.

Every endpoint of another app that an app sends to, or that subscribes to its events, is
declared with ``external_endpoint``: that list is also the queues of other apps the app's
identity may send to (``sendsTo`` in the parameters file).
"""

from __future__ import annotations

from shared.bus import BusApp
from shared.sample import app as sample
from shared.sample.charges import PROVIDER
from shared.sample.stores import LOYALTY_STORE, SHIPPING_STORE, store_named_by


def orders_app() -> BusApp:
    """Orders and the loyalty points each order earns."""
    app = BusApp()
    sample.add_checkout(app)
    loyalty = app.endpoint("loyalty", state=sample.Customer, store=store_named_by(LOYALTY_STORE))
    loyalty.handles(sample.OrderPlaced)(sample.reward)
    sample.add_storefront(app)
    app.external_endpoint("payments", accepts=[sample.ChargePayment, sample.RefundPayment])
    app.external_endpoint("shipping", accepts=[sample.ShipOrder, sample.OrderPlaced])
    return app


def payments_app() -> BusApp:
    """Charges and refunds at the payment provider, the state in PostgreSQL."""
    app = BusApp()
    payments = app.endpoint("payments", state=sample.Payment, store="postgres")
    payments.handles(sample.ChargePayment)(sample.charge)
    payments.handles(sample.ChargeAnswered)(sample.charge_answered)
    payments.handles(sample.RefundPayment)(sample.refund)
    payments.handles(sample.RefundAnswered)(sample.refund_answered)
    app.service(PROVIDER, operations={"charge": "/v1/charges", "refund": "/v1/refunds"})
    app.external_endpoint("orders", accepts=[sample.PaymentDeclined])
    app.external_endpoint("shipping", accepts=[sample.ShipOrder])
    return app


def shipping_app() -> BusApp:
    """Pick lists and shipments."""
    app = BusApp()
    shipping = app.endpoint("shipping", state=sample.Shipping, store=store_named_by(SHIPPING_STORE))
    shipping.handles(sample.OrderPlaced)(sample.prepare)
    shipping.handles(sample.ShipOrder)(sample.ship)
    app.external_endpoint("orders", accepts=[sample.OrderShipped])
    return app


orders = orders_app()
payments = payments_app()
shipping = shipping_app()
