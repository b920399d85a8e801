"""The pack's bundled module (UltimateSDUpscale bundles `modules.shared`)."""
STATE = {}
