"""gridroute.relay"""
