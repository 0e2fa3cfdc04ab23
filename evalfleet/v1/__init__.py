"""Generated from protos/evalfleet/v1/*.proto by `make protos`; never edit these modules by hand."""
