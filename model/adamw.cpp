// filled in by the model owner
