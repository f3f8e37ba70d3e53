"""Shared helpers of the test modules: model builders, exports, the browser, payloads (no tests)."""
