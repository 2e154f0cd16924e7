"""Locust load tests for the query endpoint: users, load shapes and SLOs declared as data."""
