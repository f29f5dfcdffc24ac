"""Connection Manager: client sessions, authentication, ACLs, routing to MMs, the directory."""
