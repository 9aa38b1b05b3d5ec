"""The tuning agent: search the legal set, score it with the projection, explain the winner."""
