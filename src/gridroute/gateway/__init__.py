"""gridroute.gateway"""
