"""The Kubernetes shell: msgspec codecs for raw JSON, raw API calls (bind, status, events) and the
list+watch reflector. Nothing here decides where a pod goes; the core does."""
