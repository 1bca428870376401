"""PID-file process control: stop only what we started, SIGKILL after the timeout."""

import subprocess
import sys
import time

from fleetlab import procs


def test_start_and_stop_by_pid(tmp_path):
    pid_file = tmp_path / "p.pid"
    pid = procs.start([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)], pid_file,
                      tmp_path / "p.log")
    assert procs.owned_pid(pid_file, str(tmp_path)) == pid
    assert procs.stop(pid_file, str(tmp_path), timeout=10).startswith("stopped")
    assert not procs.pid_alive(pid) and not pid_file.exists()


def test_sigkill_after_timeout(tmp_path):
    pid_file = tmp_path / "p.pid"
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    pid = procs.start([sys.executable, "-c", code, str(tmp_path)], pid_file, tmp_path / "p.log")
    time.sleep(0.5)
    assert procs.stop(pid_file, str(tmp_path), timeout=1).startswith("killed")
    assert not procs.pid_alive(pid)


def test_a_stale_pid_of_another_process_is_never_signalled(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pid_file = tmp_path / "p.pid"
        pid_file.write_text(str(other.pid))
        assert procs.owned_pid(pid_file, str(tmp_path)) is None
        assert procs.stop(pid_file, str(tmp_path)) == "not running"
        assert other.poll() is None  # still alive
    finally:
        other.kill()
        other.wait()


def test_group_stop_also_ends_children_left_behind(tmp_path):
    """A leader that exits on SIGTERM but leaves a child (as Airflow's scheduler leaves its
    LocalExecutor workers) gets its whole process group stopped."""
    pid_file = tmp_path / "p.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', "
            "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
            "open(sys.argv[1] + '/child', 'w').write(str(c.pid)); time.sleep(60)")
    procs.start([sys.executable, "-c", code, str(tmp_path)], pid_file, tmp_path / "p.log")
    for _ in range(100):
        if (tmp_path / "child").exists() and (tmp_path / "child").read_text():
            break
        time.sleep(0.05)
    child = int((tmp_path / "child").read_text())
    assert procs.pid_alive(child)
    result = procs.stop(pid_file, str(tmp_path), timeout=5, group=True)
    assert "left-behind" in result, result
    for _ in range(50):
        if not procs.pid_alive(child):
            break
        time.sleep(0.1)
    assert not procs.pid_alive(child)


def test_without_group_a_child_is_not_touched(tmp_path):
    pid_file = tmp_path / "p.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "open(sys.argv[1] + '/child', 'w').write(str(c.pid)); time.sleep(60)")
    procs.start([sys.executable, "-c", code, str(tmp_path)], pid_file, tmp_path / "p.log")
    for _ in range(100):
        if (tmp_path / "child").exists() and (tmp_path / "child").read_text():
            break
        time.sleep(0.05)
    child = int((tmp_path / "child").read_text())
    try:
        procs.stop(pid_file, str(tmp_path), timeout=5)
        assert procs.pid_alive(child)
    finally:
        import os
        import signal
        os.kill(child, signal.SIGKILL)
