"""Planning: an SLA plus node facts become a ContainerPlan (what the container gets)."""
