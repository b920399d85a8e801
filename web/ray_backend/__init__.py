"""`main.py --ray`: the server keeps HTTP/WebSocket, the SQLite queue and history, validation and
/object_info; prompts run on Ray worker actors, one prompt per actor at a time.

  dispatcher.py  RayDispatcher: the QueueWorker's interface, over worker actors (server side)
  actor.py       WorkerActor: the Ray actor around `runtime.WorkerRuntime` (imports ray)
  runtime.py     WorkerRuntime: one worker's environment, registry, executor and memory manager
  placement.py   which free worker takes a prompt (loader-input affinity, then least loaded)
  files.py       input files to workers, output/temp files back to the server
  cluster.py     joining the cluster (or starting a local instance), keeping the signal handlers
  errors.py      the typed errors

Only `dispatcher.py` and `actor.py` import Ray, and nothing imports them without --ray.
"""
