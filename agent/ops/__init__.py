"""Operations a person or the model can ask for, one implementation each, which every
front-end (CLI, Telegram, MCP, the gateway) calls and only renders."""
