"""serve/stages"""
