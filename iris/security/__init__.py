"""Payload encryption: the codec, the codec server for a key holder's Temporal UI, and the pre-flight key check."""
