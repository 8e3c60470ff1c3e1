"""Helpers shared by the test suites, imported as `tests.support.<module>`: pytest puts
the repository root on sys.path (pyproject's `pythonpath`), so no test edits sys.path."""
