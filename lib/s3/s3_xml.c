/* SPDX-License-Identifier: MIT */
/*
 * s3_xml.c - the XML an S3 server sends back (s3_priv.h): errors,
 * ListObjectsV2 pages, and the replies of CreateMultipartUpload and
 * CompleteMultipartUpload; and the one document the client sends, the
 * part list that completes an upload.
 *
 * A reply is input from the network, so it is parsed as one: libxml2
 * with network access off and entities left unsubstituted, its size
 * capped by the caller (s3_http.c keeps at most 16 MiB), and a document
 * with a DTD refused outright, since no S3 reply has one and a DTD is
 * where entity expansion attacks live. Elements are matched by local
 * name, so the S3 namespace (or a server that leaves it out) makes no
 * difference.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "s3_priv.h"

/* buf parsed, with root element named root (NULL: any). @return the document or NULL. */
static xmlDoc *parse(const char *buf, size_t len, const char *root)
{
	xmlDoc *d;
	xmlNode *top;

	if (len == 0 || len > BP__S3_XML_MAX)
		return NULL;
	d = xmlReadMemory(buf, (int)len, NULL, NULL,
			  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!d)
		return NULL;
	top = xmlDocGetRootElement(d);
	if (d->intSubset || d->extSubset || !top ||
	    (root && strcmp((const char *)top->name, root))) {
		xmlFreeDoc(d);
		return NULL;
	}
	return d;
}

/* The first child element of n named name, or NULL. */
static xmlNode *child(const xmlNode *n, const char *name)
{
	for (xmlNode *c = n ? n->children : NULL; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && !strcmp((const char *)c->name, name))
			return c;
	return NULL;
}

/* n's text (its text children only), malloc'd; NULL when n is NULL or on ENOMEM. */
static char *text(const xmlNode *n)
{
	size_t len = 0;
	char *out;

	if (!n)
		return NULL;
	for (xmlNode *c = n->children; c; c = c->next)
		if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE)
			len += strlen((const char *)c->content);
	if (!(out = malloc(len + 1)))
		return NULL;
	out[0] = '\0';
	for (xmlNode *c = n->children; c; c = c->next)
		if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE)
			strcat(out, (const char *)c->content);
	return out;
}

/* n's text into buf (truncated), "" when n is NULL. */
bool bp__s3_etag_ok(const char *s, size_t n)
{
	if (n >= BP_S3_ETAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

bool bp__s3_key_ok(const char *key)
{
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

static void text_to(const xmlNode *n, char *buf, size_t len)
{
	char *t = text(n);

	snprintf(buf, len, "%s", t ? t : "");
	free(t);
}

int bp__s3_xml_error(const char *buf, size_t len, char code[64], char *msg, size_t msglen)
{
	xmlDoc *d = parse(buf, len, "Error");
	xmlNode *top;

	if (!d)
		return -EPROTO;
	top = xmlDocGetRootElement(d);
	text_to(child(top, "Code"), code, 64);
	text_to(child(top, "Message"), msg, msglen);
	xmlFreeDoc(d);
	return 0;
}

int bp__s3_xml_error_region(const char *buf, size_t len, char region[64])
{
	xmlDoc *d = parse(buf, len, "Error");

	if (!d)
		return -EPROTO;
	text_to(child(xmlDocGetRootElement(d), "Region"), region, 64);
	xmlFreeDoc(d);
	return 0;
}

static int parse_size(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!s || !*s)
		return -EPROTO;
	for (; *s; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (*s < '0' || *s > '9' || v > (UINT64_MAX - d) / 10)
			return -EPROTO;
		v = v * 10 + d;
	}
	*ret = v;
	return 0;
}

/* One <Contents> appended to l. */
static int add_object(const xmlNode *c, const char *prefix, bp__s3_list *l)
{
	bp_s3_object o = { 0 };
	char *size, *etag;
	int err;

	if (l->max && l->n >= l->max)
		return -E2BIG;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		bp_s3_object *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!(o.key = text(child(c, "Key"))))
		return child(c, "Key") ? -ENOMEM : -EPROTO;
	size = text(child(c, "Size"));
	err = parse_size(size, &o.size);
	free(size);
	if (err == 0 && strncmp(o.key, prefix, strlen(prefix)))
		err = -EPROTO;
	if (err < 0) {
		free(o.key);
		return err;
	}
	etag = text(child(c, "ETag"));
	if (!bp__s3_key_ok(o.key) || (etag && !bp__s3_etag_ok(etag, strlen(etag))))
		err = -EILSEQ;
	else
		snprintf(o.etag, sizeof(o.etag), "%s", etag ? etag : "");
	free(etag);
	if (err < 0) {
		free(o.key);
		return err;
	}
	l->v[l->n++] = o;
	return 0;
}

int bp__s3_xml_list(const char *buf, size_t len, const char *prefix, bp__s3_list *l)
{
	xmlDoc *d = parse(buf, len, "ListBucketResult");
	xmlNode *top;
	char *t;
	int err = 0;

	if (!d)
		return -EPROTO;
	top = xmlDocGetRootElement(d);
	for (xmlNode *c = top->children; c && err == 0; c = c->next)
		if (c->type == XML_ELEMENT_NODE && !strcmp((const char *)c->name, "Contents"))
			err = add_object(c, prefix, l);
	t = text(child(top, "IsTruncated"));
	l->truncated = t && !strcmp(t, "true");
	free(t);
	free(l->next);
	l->next = NULL;
	if (err == 0 && l->truncated) {
		l->next = text(child(top, "NextContinuationToken"));
		if (!l->next || !l->next[0])
			err = -EPROTO;
	}
	xmlFreeDoc(d);
	return err;
}

int bp__s3_xml_upload_id(const char *buf, size_t len, char **ret)
{
	xmlDoc *d = parse(buf, len, "InitiateMultipartUploadResult");
	xmlNode *id;
	char *t;

	if (!d)
		return -EPROTO;
	id = child(xmlDocGetRootElement(d), "UploadId");
	t = text(id);
	xmlFreeDoc(d);
	if (!t)
		return id ? -ENOMEM : -EPROTO;
	if (!t[0]) {
		free(t);
		return -EPROTO;
	}
	*ret = t;
	return 0;
}

int bp__s3_xml_complete(const char *buf, size_t len, char etag[BP_S3_ETAG_MAX], char code[64],
			char *msg, size_t msglen)
{
	xmlDoc *d = parse(buf, len, NULL);
	xmlNode *top, *tag;
	int r = -EPROTO;

	if (!d)
		return -EPROTO;
	top = xmlDocGetRootElement(d);
	if (!strcmp((const char *)top->name, "Error")) {
		text_to(child(top, "Code"), code, 64);
		text_to(child(top, "Message"), msg, msglen);
		r = 1;
	} else if (!strcmp((const char *)top->name, "CompleteMultipartUploadResult") &&
		   (tag = child(top, "ETag"))) {
		text_to(tag, etag, BP_S3_ETAG_MAX);
		r = etag[0] ? 0 : -EPROTO;
	}
	xmlFreeDoc(d);
	return r;
}

/* s with &, < and > escaped appended at *o. */
static char *escape_to(char *o, const char *s)
{
	for (; *s; s++) {
		const char *rep = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : NULL;

		if (rep) {
			strcpy(o, rep);
			o += strlen(rep);
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
	return o;
}

char *bp__s3_xml_complete_body(char (*etags)[BP_S3_ETAG_MAX], size_t n)
{
	static const char head[] = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/"
				   "2006-03-01/\">";
	static const char tail[] = "</CompleteMultipartUpload>";
	/* A part: its tags and number (80) and an ETag escaped at most 5 times its size. */
	size_t cap = sizeof(head) + sizeof(tail) + n * (80 + 5 * BP_S3_ETAG_MAX);
	char *out = malloc(cap), *o = out;

	if (!out)
		return NULL;
	o += sprintf(o, "%s", head);
	for (size_t i = 0; i < n; i++) {
		o += sprintf(o, "<Part><PartNumber>%zu</PartNumber><ETag>", i + 1);
		o = escape_to(o, etags[i]);
		o += sprintf(o, "</ETag></Part>");
	}
	sprintf(o, "%s", tail);
	return out;
}
