// filled in by the runtime owner
