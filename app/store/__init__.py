"""Persistence (SQLite through SQLAlchemy). Imports core types only; never Qt."""
