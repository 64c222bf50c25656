/* The microvm backend: a sandbox is a QEMU `-M microvm` guest with its own
 * kernel, restored from a template rather than booted, and served by
 * corral-agent over the agent protocol (see mvm_int.h for how its files
 * divide the work). */
#ifndef CRL_MICROVM_MICROVM_H
#define CRL_MICROVM_MICROVM_H

#include "../../core/backend.h"

extern const struct crl_backend_ops crl_microvm_backend;
/* The vm backend: a full system, q35 and systemd, on the same code. */
extern const struct crl_backend_ops crl_vm_backend;

#endif
