/* libarchive's pax writer calls __archive_write_entry_filetype_unsupported,
 * which libarchive defines in the object that also holds its table of every
 * write format (archive_write_set_format.c): linking it statically would
 * pull all of them in, and with xar libxml2 and ICU (megabytes the guest
 * never uses).  This definition, found first, keeps that object out.  It
 * does what libarchive's does: the entry's error, naming the format. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>

void __archive_write_entry_filetype_unsupported(struct archive *a, struct archive_entry *entry,
                                                const char *format);

void __archive_write_entry_filetype_unsupported(struct archive *a, struct archive_entry *entry,
                                                const char *format)
{
    archive_set_error(a, EINVAL, "%s: %s cannot store this type of file",
                      archive_entry_pathname(entry), format);
}
