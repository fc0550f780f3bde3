"""Built-in operators: file input and output, text splitting, key counting."""
