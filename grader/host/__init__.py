"""The trusted end of the trust boundary: launching sandboxes, and the session that talks to one."""
