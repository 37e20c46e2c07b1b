"""An in-process store with deferred writes (``mem-deferred://``), in one folder.

It behaves as S3 and Azure do where magicfs cares: a task stages a file's parts against
its final name, invisible until job commit publishes them in one step. It proves the
deferred-store seam (this folder and one line in :mod:`magicfs.stores.registry` are all
it took) and gives tests a fast store that needs no server:

* :mod:`.fs`: the fsspec filesystem (fsspec's memory filesystem, own namespace, paths
  ``bucket/key``) with staged uploads kept in process memory;
* :mod:`.writer`: the deferred writer's hooks (:mod:`magicfs.stores.deferred_writer`);
* :mod:`.adapter`: the commit side (:mod:`magicfs.stores.deferred`) and its ``SPEC``.

Importing the package registers the ``mem-deferred`` protocol with fsspec.
"""

import fsspec

fsspec.register_implementation(
    "mem-deferred", "magicfs.stores.memory_deferred.fs.MemoryDeferredFileSystem", clobber=True
)
