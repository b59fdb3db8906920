// The MPI implementations of both communication planes, and the process-level MPI session.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace pipelane {

// Each owns a duplicate of `comm` (freed on destruction).
std::unique_ptr<ControlPlane> make_mpi_control_plane(MPI_Comm comm);
std::unique_ptr<DataPlane> make_mpi_data_plane(MPI_Comm comm);

// True when this process was started by mpirun/srun (so MPI must be initialised even for one
// rank); a plain `pipelane train` never touches MPI.
bool launched_by_mpi_launcher();

// Collective over MPI_COMM_WORLD: every rank passes its error ("" when fine) and gets back the
// lowest failing rank and its message, or rank -1 when every rank is fine. Lets all ranks agree
// to stop together (nobody left waiting in a collective) with one message printed by rank 0.
struct RankFailure {
  int rank = -1;
  std::string message;
};
RankFailure first_failure(const std::string& my_error);

// Ranks sharing this host (MPI_COMM_TYPE_SHARED), for the default thread count.
int ranks_on_this_host();

// MPI_Init_thread on construction, MPI_Finalize on destruction. Errors return instead of
// aborting (MPI_ERRORS_RETURN), so a failure becomes a message naming the rank.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Ends every rank of the job at once (a rank that cannot go on must not leave the others
  // waiting on it).
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace pipelane
