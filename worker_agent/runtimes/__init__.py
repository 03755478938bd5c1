"""Task runtimes behind one protocol (``base.ContainerRuntime``): host processes, Docker, containerd (CRI)."""
