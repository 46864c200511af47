"""Docker GPU hosts (type tokens `rocm-stack:docker:*`)."""
