"""Platforms against real engines (sshd) and fakes of cloud APIs that speak the real wire protocol."""
