"""serve/llm"""
