"""HybridMQ broker processes: the Connection Manager (cm) and the Message Manager (mm)."""
