"""gridroute.core"""
