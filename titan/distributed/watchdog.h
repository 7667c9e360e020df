// The collective watchdog: a rank that waits in one collective longer than the
// timeout (TITAN_COLLECTIVE_TIMEOUT_S seconds, default 600; 0 = off) prints which
// collective and how long on stderr, naming its rank, and exits with code 3; mpirun
// then ends the other ranks. This bounds a run whose peer hangs without dying (a
// dead peer is already detected by mpirun, which kills the job).
#pragma once

namespace titan::distributed {

// Starts the watchdog thread for this process (world rank `rank`); idempotent.
// Throws titan::Error for a malformed TITAN_COLLECTIVE_TIMEOUT_S.
void start_watchdog(int rank);
void stop_watchdog();

// Marks the calling thread as inside collective `name` while the scope lives
// (not nested: an inner scope restarts the clock).
class CollectiveScope {
 public:
  explicit CollectiveScope(const char* name);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;
};

}  // namespace titan::distributed
