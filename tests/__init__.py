"""nri-sla's test suites; shared helpers live in tests.support."""
