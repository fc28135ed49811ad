"""DRF views: thin adapters over conversations.services and conversations.selectors."""
