"""tfevo.qd"""
