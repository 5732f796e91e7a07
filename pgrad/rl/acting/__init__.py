"""Acting: the numpy mirror of the actor's forward pass (``policy``), its sampling, and the
compiled actors for what numpy cannot mirror (CNN encoders, recurrent cores, a Transformer
acting one token at a time with a key/value cache).
"""
