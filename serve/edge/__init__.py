"""serve/edge"""
