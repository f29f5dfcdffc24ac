"""``hybridmq local``: a development cluster of real processes on loopback."""
