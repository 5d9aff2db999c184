"""The model door: settings, pricing, chat with structured replies, embeddings, batches, the reply cache
and rate limits. The only package that imports litellm."""
