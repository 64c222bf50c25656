/* The container backend: a sandbox is a process tree in namespaces of its
 * own (namespaces, cgroups, seccomp), made by corral-init (see container.c). */
#ifndef CRL_CONTAINER_CONTAINER_H
#define CRL_CONTAINER_CONTAINER_H

#include "../../core/backend.h"

extern const struct crl_backend_ops crl_container_backend;

#endif
