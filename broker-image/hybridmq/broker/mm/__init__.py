"""Message Manager: stores partitions in logs and delivers them to subscriptions."""
