"""Destinations: names, reserved names, wildcard matching, topic and queue delivery state."""
