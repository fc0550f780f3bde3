"""The client side: what ``stram`` commands run on the user's machine.

``cli``
    The ``stram`` command line.
``commands``
    Talking to a running application, local or on YARN.
``adminhttp``, ``follow``
    The admin API's HTTP helper; following an application until it ends.
``yarn``
    Submitting to YARN through Skein: the application spec, the driver, the client calls.
"""
