"""``opmarket new``'s project templates (``*.tmpl``) and the command that renders them."""
