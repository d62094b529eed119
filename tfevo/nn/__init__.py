"""tfevo.nn"""
