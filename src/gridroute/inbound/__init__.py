"""What every gridroute listener does with the connections it accepts, before any route.

The gateway's API and the operator's `/signals` listener both run aiohttp; this package
bounds what a client can hold there (header, body and idle timeouts, a connection
limit), answers every protocol error with a JSON body, and counts and rate-limits the
logging of client errors. It imports no process package, so both processes use it.
"""
