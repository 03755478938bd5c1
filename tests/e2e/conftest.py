"""The end-to-end suite runs on the session cluster of tests/conftest.py (`cluster`, `client`)."""

from tests.conftest import TEST_FLEET

__all__ = ["TEST_FLEET"]
