#ifndef CRL_CONTAINER_SPAWNER_H
#define CRL_CONTAINER_SPAWNER_H

/* Run a spawner on `sock` (see spawn_proto.h) until corrald goes away.
 * `workdir` is the empty host directory each new sandbox mounts its writable
 * layer over, in its own mount namespace; `init_path` the corral-init binary
 * a sandbox's PID 1 becomes.  Returns the process exit code. */
int crl_spawner_main(int sock, const char *workdir, const char *init_path);

#endif
