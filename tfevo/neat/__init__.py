"""tfevo.neat"""
