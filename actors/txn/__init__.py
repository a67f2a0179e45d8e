"""The transaction coordinator: Kafka's transactional producers' state, kept in the internal
`__transaction_state` topic, and the commit and abort markers it has partition leaders write."""
