"""One module per stage; each stage is a pure function of its inputs and the generation seed."""
