"""What several test files share: the functions that worker and cluster processes run,
scripts, and waits on processes. `tests/conftest.py` puts `tests/` on ``sys.path``, so
test files import these as ``_support.<module>``, and so do the processes they start
with `processes.script_environment()` or through `launch_local`.

Child processes import some of these modules, so none of them imports pytest.
"""
