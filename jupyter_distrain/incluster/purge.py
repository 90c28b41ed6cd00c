"""A job's own output directory deleted, by a pod that mounts its owner's directory (render.purger), which no job
mounts: `python purge DIRECTORY NAME` deletes DIRECTORY/NAME, a link to it unlinked, the links inside removed, not
followed. Standard library only: it runs in this product's image, or the job's."""

import os
import shutil
import sys

path = os.path.join(sys.argv[1], sys.argv[2])  # in the owner's directory, all of the volume the pod mounts
if os.path.islink(path):
    os.unlink(path)
elif os.path.isdir(path):
    shutil.rmtree(path)  # the links inside removed, not followed
