"""Beam model handlers over Arrow record batches, split along Beam's own seams
(``apache_beam.ml.inference``):

* :mod:`.tensors` - record batch <-> named numpy tensors (input builders, response check);
* :mod:`.base` - the handler plumbing both backends share;
* :mod:`.triton` - :class:`~.triton.TritonModelHandler` (a remote server), built on
  :mod:`.triton_client` (connection, shared memory via :mod:`.shm`, the one retry loop);
* :mod:`.function` - :class:`~.function.FunctionModelHandler` (a Python function in-process).
"""
