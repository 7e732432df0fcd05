"""The offline tools: ``simulate``, ``explain`` (with its hints), their pictures, and the
openb benchmark — one input loader (`inputs`) and one engine run (`simulate`) under them."""
