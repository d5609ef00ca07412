package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
)

// keysUsage is what `parley keys` does, per command.
var keysUsage = map[string]string{
	"create": "Makes an API key and prints its secret once: parley keys create --user NAME [--name LABEL] [--admin] [--expires-in 720h]",
	"list":   "Lists API keys (never their secrets): parley keys list [--user NAME]",
	"revoke": "Revokes an API key: parley keys revoke [flags] ID",
}

// runKeys manages API keys in the database: parley keys create|list|revoke. Each command has its
// own flags; of the environment and the config file only the database settings apply.
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const want = "parley keys create|list|revoke [flags] (parley keys <command> -h for its flags)"
	if len(args) == 0 {
		return errors.New("keys: want a command: " + want)
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "create", "list", "revoke":
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, "Usage: %s\n\n  create  %s\n  list    %s\n  revoke  %s\n", want, keysUsage["create"], keysUsage["list"], keysUsage["revoke"])
		return errHelpShown
	default:
		return fmt.Errorf("keys: unknown command %q; want %s", cmd, want)
	}
	fs := flagSet("keys "+cmd, stderr, keysUsage[cmd]+"\n"+databaseNote)
	db, databaseURL := databaseFlags(fs)
	var user, name *string
	var admin *bool
	var expiresIn *time.Duration
	switch cmd {
	case "create":
		user = fs.String("user", "", "the user the key acts as (required)")
		name = fs.String("name", "", "a label for the key")
		admin = fs.Bool("admin", false, "the key may manage keys through the admin API")
		expiresIn = fs.Duration("expires-in", 0, "the key expires after this long (0: never)")
	case "list":
		user = fs.String("user", "", "list only this user's keys")
	}
	if err := parsed(fs, parseFlags(fs, args, getenv, nil, databaseFlag), stdout); err != nil {
		return err
	}
	// Checked before the database is opened: a refused command touches nothing.
	switch cmd {
	case "create":
		if err := auth.CheckUser(*user); err != nil {
			return fmt.Errorf("keys create: --%v", err)
		}
		if err := parley.CheckText("name", *name, parley.TextName); err != nil {
			return fmt.Errorf("keys create: --%s", parley.MessageOf(err))
		}
		if len(*name) > 200 {
			return errors.New("keys create: --name: at most 200 bytes")
		}
		if *expiresIn < 0 {
			return errors.New("keys create: --expires-in must not be negative")
		}
	case "list":
		if *user != "" {
			if err := parley.CheckText("user", *user, parley.TextName); err != nil {
				return fmt.Errorf("keys list: --%s", parley.MessageOf(err))
			}
		}
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("keys revoke: want the key's ID: parley keys revoke ID")
		}
	}
	if cmd != "revoke" && fs.NArg() > 0 {
		return fmt.Errorf("keys %s: unexpected argument %q", cmd, parley.SafeText(fs.Arg(0)))
	}
	d, err := openDatabase(ctx, *db, *databaseURL, true)
	if err != nil {
		return err
	}
	defer d.Close()

	switch cmd {
	case "create":
		secret, k := auth.NewKey(*user, *name, *admin, false, time.Now(), *expiresIn)
		if err := d.CreateAPIKey(ctx, k); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", secret)
		fmt.Fprintf(stderr, "created key %s for user %q%s; the secret above is shown only now\n", k.ID, k.User, map[bool]string{true: " (admin)"}[k.Admin])
	case "list":
		keys, err := d.ListAPIKeys(ctx, *user, 10_000)
		if err != nil {
			return err
		}
		return printKeys(stdout, keys, time.Now())
	case "revoke":
		k, err := d.RevokeAPIKey(ctx, fs.Arg(0), time.Now().UTC())
		if err != nil {
			return fmt.Errorf("keys revoke: %w", err)
		}
		fmt.Fprintf(stdout, "revoked %s (user %s)\n", k.ID, parley.SafeText(k.User))
	}
	return nil
}

// printKeys writes the table of `parley keys list`. Every stored text goes through SafeText: a
// name stored before names were checked cannot move the cursor, recolour the terminal or turn the
// line around; it shows as escapes.
func printKeys(w io.Writer, keys []parley.APIKey, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tNAME\tPREFIX\tADMIN\tCREATED\tLAST USED\tSTATE")
	for _, k := range keys {
		state := "active"
		switch {
		case k.RevokedAt != nil:
			state = "revoked " + k.RevokedAt.Format(time.RFC3339)
		case !k.Usable(now):
			state = "expired"
		case k.ExpiresAt != nil:
			state = "expires " + k.ExpiresAt.Format(time.RFC3339)
		}
		used := "never"
		if k.LastUsedAt != nil {
			used = k.LastUsedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%v\t%s\t%s\t%s\n", parley.SafeText(k.ID), parley.SafeText(k.User), parley.SafeText(k.Name),
			parley.SafeText(k.Prefix), k.Admin, k.CreatedAt.Format(time.RFC3339), used, state)
	}
	return tw.Flush()
}
