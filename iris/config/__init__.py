"""The cluster config file (`iris cluster up --config FILE`): its pydantic models and reference."""
