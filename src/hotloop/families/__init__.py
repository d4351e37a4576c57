"""Policy families: each one a package behind the protocol in `hotloop.families.protocol`."""
